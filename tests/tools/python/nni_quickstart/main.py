# The statements of NNI's HPO quickstart, examples/tutorials/hpo_quickstart_pytorch/main.py
# (https://github.com/microsoft/nni), unchanged and in order; NNI's tutorial prose
# between them is left out. Copyright (c) Microsoft Corporation, MIT license.
# tunehost's tests run this file as it is (test_nni_quickstart.py).

search_space = {
    'features': {'_type': 'choice', '_value': [128, 256, 512, 1024]},
    'lr': {'_type': 'loguniform', '_value': [0.0001, 0.1]},
    'momentum': {'_type': 'uniform', '_value': [0, 1]},
}

from nni.experiment import Experiment
experiment = Experiment('local')

experiment.config.trial_command = 'python model.py'
experiment.config.trial_code_directory = '.'

experiment.config.search_space = search_space

experiment.config.tuner.name = 'TPE'
experiment.config.tuner.class_args['optimize_mode'] = 'maximize'

experiment.config.max_trial_number = 10
experiment.config.trial_concurrency = 2

experiment.run(8080)

# input('Press enter to quit')
experiment.stop()
